# Embeds compiler/cuda/prelude.cuh into a C++ source as a raw string (run at build time).
file(READ ${INPUT} text)
file(WRITE ${OUTPUT} "// Generated from compiler/cuda/prelude.cuh by embed_prelude.cmake; do not edit.\n"
     "namespace kiln::cuda {\nextern const char* const kPreludeText;\n"
     "const char* const kPreludeText = R\"kiln_prelude(${text})kiln_prelude\";\n}\n")
