/* NCCL STAND-IN (issue 32), not NCCL: the 11 functions torch 2.14.1's libtorch_cuda.so imports that the GPU
 * machine's NCCL 2.28.9 (nvidia-nccl-cu13, beside its torch 2.11) does not define. Found on the CPU machine with
 *   nm -D --undefined-only torch/lib/libtorch_cuda.so   (torch-2.14.1-cp312 wheel; torch pins nvidia-nccl-cu13 2.30.7)
 *   nm -D --defined-only nvidia/nccl/lib/libnccl.so.2   (nvidia_nccl_cu13-2.28.9 wheel)
 * The references are PLT slots (R_X86_64_JUMP_SLOT), but Python loads extension modules with RTLD_NOW, which binds
 * them at `import torch`: without a definition the import fails. Preloaded (LD_PRELOAD) only in the issue-32 proof's
 * processes, this library lets torch load; every function here, if ever called, says so on stderr and returns
 * ncclInternalError (3), so nothing can take it for NCCL. One GPU and no process group never call them.
 * Chosen over carrying nvidia-nccl-cu13 2.30.7 (a 216 MB wheel: about 4 more 60 MiB carry calls).
 * Build: cc -shared -fPIC -O2 -o libnccl_standin.so tests/gpu/nccl_standin.c */
#include <stdio.h>

#define NCCL_STANDIN_INTERNAL_ERROR 3

static int standin_called(const char *name) {
    fprintf(stderr, "nccl_standin: %s called: this is a stand-in for an NCCL 2.30 function that the NCCL "
                    "installed here lacks; returning ncclInternalError\n", name);
    return NCCL_STANDIN_INTERNAL_ERROR;
}

/* Arguments are not declared: the callers pass theirs in registers; a stand-in reads none of them. */
#define STANDIN(name) int name() { return standin_called(#name); }

STANDIN(ncclCommGetUniqueId)
STANDIN(ncclCommGrow)
STANDIN(ncclCommMemStats)
STANDIN(ncclCommResume)
STANDIN(ncclCommSuspend)
STANDIN(ncclGetLsaMultimemDevicePointer)
STANDIN(ncclGetPeerDevicePointer)
STANDIN(ncclPutSignal)
STANDIN(ncclSignal)
STANDIN(ncclWaitSignal)
STANDIN(ncclWinGetUserPtr)
