# Sourced by demo.sh, test.sh and package.sh: one way to build cosched.
#
# build/ is configured the way the Debian packages are built (debian/rules):
# dpkg-buildflags' flags with the same DEB_BUILD_MAINT_OPTIONS and CMake's
# build type None. So the tests run what is shipped (hardening,
# _FORTIFY_SOURCE, assertions on), and the package build finds the programs'
# objects in ccache instead of compiling them a second time.
#
# ccache: each build maps its own source root to "." (-ffile-prefix-map), so
# objects of build/ and of package.sh's copy of the tree are the same file,
# except for the object folder named in the debug information; base_dir and
# nohashdir let one tree use the other's objects, and the prefix map's
# differing path is left out of the hash. The cache is named here, as an
# absolute path: debhelper (compat 13) gives the package build a HOME of
# its own, where ccache's default (~/.cache/ccache) would be a new, empty
# cache and every object a miss.
COSCHED_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${CCACHE_DIR:-}" ] && command -v ccache >/dev/null; then
  CCACHE_DIR=$(ccache -k cache_dir)
  export CCACHE_DIR
fi
export CCACHE_BASEDIR=$COSCHED_ROOT
export CCACHE_NOHASHDIR=true
export CCACHE_IGNOREOPTIONS='-ffile-prefix-map=*'
# CMake reads these when it configures (debhelper's dh_auto_configure too).
export CMAKE_C_COMPILER_LAUNCHER=ccache
export CMAKE_CXX_COMPILER_LAUNCHER=ccache

# cosched_configure BUILD_DIR [CMAKE_ARGS...]
cosched_configure() {
  local dir=$1
  shift
  local flags
  # debian/rules exports the same DEB_BUILD_MAINT_OPTIONS; debhelper appends
  # CPPFLAGS to CMake's C and C++ flags, as here.
  flags=$(cd "$COSCHED_ROOT" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)
  (
    eval "$flags"
    cmake -S "$COSCHED_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=None \
      -DCMAKE_C_FLAGS="$CFLAGS $CPPFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS $CPPFLAGS" \
      -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS" \
      -DCMAKE_MODULE_LINKER_FLAGS="$LDFLAGS" "$@"
  )
}
