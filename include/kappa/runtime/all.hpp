// kappa/runtime/all.hpp - the whole runtime (kappa/runtime.hpp's
// definitions) for a build without CMake: compile one file of your own
// whose only line includes kappa/runtime/all.hpp
// (with kappa's include directories, Eigen and nlohmann/json; -fopenmp for
// threads) and link it with your program. CMake users link kappa::runtime,
// which compiles the three parts below as separate files.
#pragma once

#include "kappa/runtime/as_stored.hpp"
#include "kappa/runtime/bf16.hpp"
#include "kappa/runtime/model.hpp"
