#!/bin/sh
# SGLang server for Qwen3-Coder-480B-A35B-Instruct-FP8 on one 8-GPU node, started through dgprecompile launch:
# plan from this very command, check the cache (exit 1 + the warm command when kernels are missing), then run it
# with SGLang's DeepGEMM precompile off and runtime compiles refused. See README.md for plan/warm/verify.
exec dgprecompile launch -- python -m sglang.launch_server \
  --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8 --host 0.0.0.0 --port 30000 "$@"
