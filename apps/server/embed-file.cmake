# Turns a file into a C++ source defining `const char NAME[]` and `const size_t NAME_SIZE`
# (hex bytes, so any content is safe). Run as: cmake -DIN=... -DOUT=... -DNAME=... -P this.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
string(REGEX REPLACE "(('\\\\x[0-9a-f][0-9a-f]',){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by embed-file.cmake; do not edit.\n#include <cstddef>\nnamespace hearth::server {\nextern const char ${NAME}[] = {\n${bytes}'\\0'};\nextern const size_t ${NAME}Size = ${size};\n}  // namespace hearth::server\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
