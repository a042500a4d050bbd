#!/bin/sh
# Writes the Python modules of the v1 API (cosched/v1/*_pb2.py, *_pb2.pyi,
# *_pb2_grpc.py) into OUT_DIR, from the project's proto/ by default.
# The build runs it into build/clients/python; for a standalone install, run
# it into the directory that holds the cosched package (docs/python-client.md).
#   usage: generate.sh OUT_DIR [PROTO_DIR]
# PROTOC and GRPC_PYTHON_PLUGIN override the tools (Debian's protobuf-compiler
# and protobuf-compiler-grpc).
set -eu
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT_DIR [PROTO_DIR]" >&2
  exit 2
fi
out=$1
proto_dir=${2:-$(cd "$(dirname "$0")/../../proto" && pwd)}
plugin=${GRPC_PYTHON_PLUGIN:-/usr/bin/grpc_python_plugin}
[ -x "$plugin" ] || { echo "$0: no grpc_python_plugin at $plugin (apt-get install protobuf-compiler-grpc)" >&2; exit 1; }
mkdir -p "$out"
cd "$proto_dir"
"${PROTOC:-protoc}" -I . \
  --python_out="$out" --pyi_out="$out" \
  --grpc_out="$out" --plugin=protoc-gen-grpc="$plugin" \
  cosched/v1/types.proto cosched/v1/control_plane.proto \
  cosched/v1/agent.proto cosched/v1/config.proto
