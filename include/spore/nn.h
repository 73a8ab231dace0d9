#pragma once
// spore's neural-network layer: Cell, parameters, initializers, layers and losses (MindSpore-style).
//
//   #include <spore/nn.h>
//   spore::nn::set_seed(0);
//   spore::nn::Dense fc{784, 10};
//   spore::nn::SoftmaxCrossEntropyWithLogits loss_fn{true, "mean"};
//   auto [loss, grads] = spore::nn::value_and_grad(fc, [&] { return loss_fn(fc(x), labels); });
#include "nn/cell.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "spore/spore.h"
