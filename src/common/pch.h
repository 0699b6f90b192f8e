// Precompiled header: torch/torch.h dominates compile time, so every target shares one PCH.
#pragma once
#include <torch/torch.h>
#include <spdlog/spdlog.h>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
