#pragma once
// One assertion for the "bad input → attn::Error naming the argument" contract: runs `f` and
// succeeds only if it throws attn::Error whose message contains every fragment (argument name,
// offending value, expectation). Any other outcome fails with the actual message.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "attn/error.hpp"

namespace attn::test {

template <typename F>
::testing::AssertionResult throws_error(F&& f, std::initializer_list<std::string_view> fragments) {
  try {
    f();
  } catch (const attn::Error& e) {
    const std::string msg = e.what();
    for (std::string_view frag : fragments)
      if (msg.find(frag) == std::string::npos)
        return ::testing::AssertionFailure() << "attn::Error message lacks '" << frag << "': " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-attn exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception thrown";
}

/// The message of the attn::Error `f` throws ("" if it throws none).
template <typename F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const attn::Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace attn::test
