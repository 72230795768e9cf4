#!/bin/sh
# The external SpecForge 0.2.0 capture server for run-480b-external.yaml, started through dgprecompile launch:
# the cache is checked first (exit 1 and the warm command when kernels are missing), then SGLang runs with its
# own DeepGEMM precompile off and runtime compiles refused. Needs sglang 0.5.14 with SpecForge's spec-capture
# patch (SpecForge's scripts/apply_sglang_spec_capture_patch.sh). Options as SpecForge's managed-local servers get them
# (launch_plan.py:468-540): chunked prefill off, context = data.max_length + 7.
exec dgprecompile launch -- python -m sglang.launch_server \
  --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --dtype bfloat16 --skip-tokenizer-init \
  --tp-size 8 --ep-size 8 --chunked-prefill-size -1 --context-length 2055 \
  --enable-spec-capture --spec-capture-method eagle3 \
  --mem-fraction-static 0.6 --disable-radix-cache --attention-backend flashinfer \
  --host 0.0.0.0 --port 30000 "$@"
