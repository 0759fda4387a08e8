// A stand-in NVRTC whose compile crashes (SIGSEGV), as NVRTC 13.0's embedded ptxas has been
// seen to on some wgmma code, or with KILN_FAKE_NVRTC=hang never returns: loaded through
// KILN_NVRTC_LIBRARY by the worker-process tests.
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>

extern "C" {
int nvrtcVersion(int* major, int* minor) {
  *major = 13;
  *minor = 0;
  return 0;
}
int nvrtcGetNumSupportedArchs(int* n) {
  *n = 1;
  return 0;
}
int nvrtcGetSupportedArchs(int* archs) {
  archs[0] = 90;
  return 0;
}
int nvrtcCreateProgram(void** prog, const char*, const char*, int, const char* const*,
                       const char* const*) {
  static int program;
  *prog = &program;
  return 0;
}
int nvrtcCompileProgram(void*, int, const char* const*) {
  if (const char* how = std::getenv("KILN_FAKE_NVRTC"); how && std::strcmp(how, "hang") == 0)
    for (;;) ::pause();
  std::raise(SIGSEGV);
  return 0;
}
int nvrtcGetProgramLogSize(void*, size_t* n) {
  *n = 1;
  return 0;
}
int nvrtcGetProgramLog(void*, char* log) {
  log[0] = '\0';
  return 0;
}
int nvrtcGetPTXSize(void*, size_t* n) {
  *n = 0;
  return 0;
}
int nvrtcGetPTX(void*, char*) {
  return 0;
}
int nvrtcGetCUBINSize(void*, size_t* n) {
  *n = 0;
  return 0;
}
int nvrtcGetCUBIN(void*, char*) {
  return 0;
}
int nvrtcDestroyProgram(void**) {
  return 0;
}
const char* nvrtcGetErrorString(int) {
  return "fake error";
}
}
