// zeroshard: the common API in one include, for a program that embeds training
// of its own model (docs/embedding.md).
//
//   #include "zeroshard/zeroshard.h"
//
// Tensors and devices, autograd and modules (Module, UnaryModule, Linear,
// LayerNorm, ...), the communicators (in-process ranks, MPI), the sharding
// runtime (ShardedModel and its options), the optimizers (ShardedOptimizer,
// OptimWrapper, learning-rate schedules, gradient clipping, user-defined
// rules), checkpoints, and the training kit of train/ (TrainStep, the run
// folder, metrics.csv, TensorBoard events, the progress bar, the log sink).
//
// Every header is public and installed under include/zeroshard/ (`make
// install`); the ones named here are the stable API (docs/embedding.md,
// "What is public"). The rest (kernels/cpu/..., kernels/cuda/..., names in
// `internal` namespaces) may change between versions.
#ifndef ZEROSHARD_ZEROSHARD_H_
#define ZEROSHARD_ZEROSHARD_H_

#if __cplusplus < 202002L
#error "zeroshard's headers need C++20: compile with -std=c++20 (the CMake target and zeroshard.pc say so)"
#endif

#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/tensor.h"

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/autograd/nn/init.h"
#include "zeroshard/autograd/nn/layers.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/nn/module.h"

#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/collectives/local_communicator.h"

#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/sharding/sharding_options.h"

#include "zeroshard/optim/grad_clip.h"
#include "zeroshard/optim/lr_schedule.h"
#include "zeroshard/optim/optim_wrapper.h"
#include "zeroshard/optim/sharded_optimizer.h"

#include "zeroshard/checkpoint/checkpoint.h"

#include "zeroshard/train/log_sink.h"
#include "zeroshard/train/loop.h"
#include "zeroshard/train/metrics.h"
#include "zeroshard/train/progress.h"
#include "zeroshard/train/run_dir.h"
#include "zeroshard/train/tensorboard.h"
#include "zeroshard/train/train_step.h"

#endif  // ZEROSHARD_ZEROSHARD_H_
