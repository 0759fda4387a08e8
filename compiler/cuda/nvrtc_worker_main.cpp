// kiln-nvrtc-worker: compiles one CUDA program with NVRTC for a kiln process that asked for it
// out of process (KILN_NVRTC=worker, compiler/cuda/nvrtc.h). The request comes on stdin, the
// answer goes to stdout; if NVRTC crashes, only this process goes down.
#include "compiler/cuda/nvrtc.h"

int main() {
  return kiln::cuda::nvrtc_worker_main(0, 1);
}
