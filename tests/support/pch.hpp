// tests/support/pch.hpp - the precompiled header of kappa's tests (see
// tests/CMakeLists.txt, KAPPA_TEST_PCH): the third-party and standard headers
// every test parses. kappa's own headers stay out of it, so editing one does
// not rebuild the precompiled header, and each test still includes what it
// uses.
#pragma once

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
