#!/usr/bin/env bash
# Prints the version of this clone's build: the release under way
# (CMakeLists.txt's project VERSION), then ~git<commit date>.<commits>.<commit>,
# e.g. 0.2.0~git20261206.412.9fdacd1. Debian's "~" sorts before the release
# itself, and the count of commits orders two builds of one day, so apt
# upgrades from any older build to any newer one. Without git history (a
# tarball): the release alone. CMake (common/) and scripts/package.sh use it.
#
# $COSCHED_VERSION_SUFFIX, when set, is appended: "+" and letters, digits
# or dots (+lab1). Debian sorts it after the same build without it and before
# the next commit's, so a second package set rebuilt from one tree with a
# suffix is an upgrade of the first (lab.systemd_upgrade installs one, then
# upgrades to the other: scripts/test.sh builds both).
set -euo pipefail
suffix=${COSCHED_VERSION_SUFFIX:-}
if [ -n "$suffix" ] && ! [[ $suffix =~ ^\+[A-Za-z0-9.]+$ ]]; then
  echo "version.sh: COSCHED_VERSION_SUFFIX '$suffix' is not '+' then letters, digits or dots" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
release=$(sed -n 's/^project(cosched VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$release" ] || { echo "version.sh: no project VERSION in CMakeLists.txt" >&2; exit 1; }
if commit=$(git rev-parse --short=7 HEAD 2>/dev/null); then
  date=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d HEAD)
  echo "$release~git$date.$(git rev-list --count HEAD).$commit$suffix"
else
  echo "$release$suffix"
fi
