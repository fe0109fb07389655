# Sourced by the build scripts: use Debian's ccache when it is there, with its cache outside the
# clone (~/.cache/ccache) and paths taken relative to the clone, so a second run on the same
# machine (even from another clone folder) compiles only what changed.
CMAKE_LAUNCHER_ARGS=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd -P)}"
  export CCACHE_NOHASHDIR=true
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-12G}"
  export CCACHE_COMPILERCHECK=content
  CMAKE_LAUNCHER_ARGS=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
