#!/usr/bin/env bash
# Builds the Debian packages of debian/ (cosched-server: csd, cosched-agent:
# cs-agent, cosched-client: csctl) with `dpkg-buildpackage -b -us -uc`, without
# running tests (./scripts/test.sh runs them, with what they need), and checks
# them with lintian: any error fails, warnings are listed.
#
#   scripts/package.sh [--quick] [OUTDIR]    (default build-deb/; the .debs land there)
#
# The version is scripts/version.sh's, so COSCHED_VERSION_SUFFIX=+lab1 builds
# the same tree as a higher version (lab.systemd_upgrade upgrades to it).
# --quick builds the installable packages only: no -dbgsym packages
# (noautodbgsym: compressing their ~60 MB is a third of the build), no
# lintian, systemd-analyze verify or maintainer-script test. For a second
# set of one tree that differs from the first only in its version
# (scripts/test.sh), which the first set's checks cover.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
out=${1:-build-deb}
started=$SECONDS

./scripts/install-deps.sh
# ccache settings shared with build/ (whose objects the programs reuse).
. scripts/build-env.sh
# dpkg-buildpackage writes its results beside the source tree and builds in
# it: a copy of the clone's files (tracked and new, not ignored ones such as
# build/) keeps both out of the working tree.
rm -rf "$out"
mkdir -p "$out/src"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -C "$out/src" -xf -
# ccache's counters before and after: how many objects came from build/.
ccache_counts() {
  ccache --print-stats | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2}
    $1 == "cache_miss" {m = $2}
    END {print h + 0, m + 0}'
}
# Every build is a version of its own (scripts/version.sh), so that apt
# upgrades from one to the next and `dpkg -l` tells them apart: a changelog
# entry of the copy, dated at the commit.
version=$(./scripts/version.sh)
if [ "$version" != "$(dpkg-parsechangelog -l debian/changelog -S Version)" ]; then
  stamp=$(git log -1 --format=%cD 2>/dev/null || date -R)
  maintainer=$(dpkg-parsechangelog -l debian/changelog -S Maintainer)
  { printf 'cosched (%s) bookworm; urgency=medium\n\n  * Build of %s%s.\n\n -- %s  %s\n\n' \
      "$version" "$(git rev-parse --short=7 HEAD 2>/dev/null || echo 'a tree without git history')" \
      "${COSCHED_VERSION_SUFFIX:+, rebuilt as a higher version ($COSCHED_VERSION_SUFFIX)}" \
      "$maintainer" "$stamp"
    cat debian/changelog; } >"$out/src/debian/changelog"
fi
read -r hits0 misses0 < <(ccache_counts)
build_options="nocheck parallel=$(nproc)"
[ $quick = 0 ] || build_options="$build_options noautodbgsym"
(cd "$out/src" && DEB_BUILD_OPTIONS=$build_options dpkg-buildpackage -b -us -uc)
read -r hits1 misses1 < <(ccache_counts)
echo "package.sh: ccache: $((hits1 - hits0)) objects from the cache, $((misses1 - misses0)) compiled"
rm -rf "$out/src"
ls -l "$out"/*.deb
if [ $quick = 1 ]; then
  echo "package.sh: built $version in $((SECONDS - started)) s (--quick: no -dbgsym packages, no checks)"
  exit 0
fi

# lintian refuses nothing as root but says so; --fail-on error makes an
# error fail the build, and every warning is printed.
changes=$(ls "$out"/*.changes)
lintian --fail-on error --tag-display-limit 0 "$changes"
echo "package.sh: lintian found no error in $(basename "$changes")"

# systemd-analyze verify of the units as the packages install them: their
# files over a copy of this system's own units (the targets and sockets the
# units name), so ExecStart= is checked against the packaged binaries. It
# returns 0 on warnings such as an unknown key, so any message fails.
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
for deb in "$out"/cosched-server_*.deb "$out"/cosched-agent_*.deb "$out"/cosched-client_*.deb; do
  dpkg-deb -x "$deb" "$root"
done
# cs-agent's ExecReload= runs /bin/kill, from procps (a dependency of
# cosched-agent).
mkdir -p "$root/usr/bin"
cp /bin/kill "$root/usr/bin/kill"
[ -e "$root/bin" ] || ln -s usr/bin "$root/bin"
units=$(cd "$root" && ls lib/systemd/system/*.service | sed 's|^|/|')
verify=$(systemd-analyze verify --man=no --root="$root" $units 2>&1) || true
if [ -n "$verify" ]; then
  echo "$verify"
  echo "package.sh: systemd-analyze verify found problems in the packaged units"
  exit 1
fi
echo "package.sh: systemd-analyze verify is clean for" $units

# The maintainer scripts: an install starts nothing, an upgrade restarts a
# running daemon and leaves a stopped one stopped.
tests/packaging/maintscripts_test.sh "$out"
echo "package.sh: built $version and checked it in $((SECONDS - started)) s"
