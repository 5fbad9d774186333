"""Generated from proto/betcode/v1 by scripts/gen_proto. Do not edit; edit the .proto files."""
