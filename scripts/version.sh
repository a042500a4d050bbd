#!/usr/bin/env bash
# Prints the version of this clone's build: the release under way
# (CMakeLists.txt's project VERSION), then ~git<commit date>.<commits>.<commit>,
# e.g. 0.2.0~git20261206.412.9fdacd1. Debian's "~" sorts before the release
# itself, and the count of commits orders two builds of one day, so apt
# upgrades from any older build to any newer one. Without git history (a
# tarball): the release alone. CMake (common/) and scripts/package.sh use it.
set -euo pipefail
cd "$(dirname "$0")/.."
release=$(sed -n 's/^project(cosched VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$release" ] || { echo "version.sh: no project VERSION in CMakeLists.txt" >&2; exit 1; }
if commit=$(git rev-parse --short=7 HEAD 2>/dev/null); then
  date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d HEAD)
  echo "$release~git$date.$(git rev-list --count HEAD).$commit"
else
  echo "$release"
fi
