# Sourced by scripts/nvcc-env.sh (hence by scripts/test.sh and scripts/demo.sh) and by .ci/run:
# makes sure libclang can be found. The default `nvtx` feature builds NVIDIA's nvtx-sys, which
# generates its bindings with bindgen (libclang) when it builds; `cargo xtask bindings` needs it
# too. Installs Debian's libclang-dev when none is present (as root, or through sudo).
# libclang itself (libclang.so*, libclang-NN.so*), not libclang-cpp, which some images carry alone.
_wn_have_libclang() {
  local p
  for p in ${LIBCLANG_PATH:+$LIBCLANG_PATH/libclang*.so*} \
           /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
           /usr/lib/*/libclang.so* /usr/lib/*/libclang-[0-9]*.so*; do
    [ -e "$p" ] && return 0
  done
  return 1
}
if ! _wn_have_libclang; then
  echo "libclang not found: installing libclang-dev (needed by the default nvtx feature)" >&2
  _wn_sudo=""
  [ "$(id -u)" = 0 ] || _wn_sudo="sudo"
  if ! { $_wn_sudo apt-get update -qq && $_wn_sudo apt-get install -y -qq libclang-dev; } >/dev/null 2>&1 \
     || ! _wn_have_libclang; then
    echo "could not install libclang-dev: install libclang, or build with --no-default-features" >&2
    return 1 2>/dev/null || exit 1
  fi
fi
