// kappa/kappa.hpp - umbrella header: everything kappa offers.
#pragma once

#include "kappa/core/checked.hpp"
#include "kappa/core/concepts.hpp"
#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "kappa/core/threading.hpp"

#include "kappa/attention/attention.hpp"
#include "kappa/attention/concepts.hpp"
#include "kappa/attention/kernels.hpp"
#include "kappa/attention/linear.hpp"
#include "kappa/attention/masks.hpp"

#include "kappa/tokenize/bpe.hpp"
#include "kappa/tokenize/bpe_train.hpp"
#include "kappa/tokenize/char_tokenizer.hpp"
#include "kappa/tokenize/concepts.hpp"
#include "kappa/tokenize/hf_tokenizer.hpp"
#include "kappa/tokenize/pretokenize.hpp"
#include "kappa/tokenize/word_tokenizer.hpp"

#include "kappa/embed/embedding.hpp"
#include "kappa/embed/positional.hpp"
#include "kappa/embed/rope.hpp"

#include "kappa/cache/kv_cache.hpp"
#include "kappa/cache/token_store.hpp"
#include "kappa/heads/grouped_attention.hpp"
#include "kappa/heads/grouping.hpp"
#include "kappa/heads/latent.hpp"
#include "kappa/heads/multi_head_attention.hpp"
#include "kappa/heads/positional.hpp"
#include "kappa/io/npy.hpp"
#include "kappa/io/safetensors.hpp"
#include "kappa/nn/norms.hpp"
