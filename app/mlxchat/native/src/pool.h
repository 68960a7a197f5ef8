// A persistent pool of worker threads for the kernels: no thread is spawned
// per call, and no thread spins at a barrier (they sleep on a condition
// variable: a busy two-core machine would starve a spinner's peers). Work is
// handed out in blocks from a shared counter, so a worker that wakes late
// (the machine busy) finds the work done by the caller instead of holding it
// up: the caller waits only for blocks already being computed.
#pragma once

#include <functional>

namespace mlxchat {

// Threads a job may use (the caller counts as one): the cores this process
// may run on, or MLXCHAT_KERNEL_THREADS.
int pool_threads();

// Run job(b) for every b in [0, blocks): on the calling thread and, when
// threads > 1, on the pool's workers too; returns when all are done.
void parallel_blocks(int blocks, int threads, const std::function<void(int)>& job);

// Run job(i, n) for i in [0, n), n = min(parts, pool_threads()).
void parallel_for(int parts, const std::function<void(int, int)>& job);

}  // namespace mlxchat
