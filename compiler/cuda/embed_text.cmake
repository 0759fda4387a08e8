# Embeds a text file into a C++ source as a raw string named kiln::cuda::${SYMBOL} (run at build
# time): the CUDA prelude and the emulator's host headers travel inside the library.
file(READ ${INPUT} text)
get_filename_component(name ${INPUT} NAME)
file(WRITE ${OUTPUT} "// Generated from ${name} by embed_text.cmake; do not edit.\n"
     "namespace kiln::cuda {\nextern const char* const ${SYMBOL};\n"
     "const char* const ${SYMBOL} = R\"kiln_embed(${text})kiln_embed\";\n}\n")
