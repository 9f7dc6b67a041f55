// ipj's environment table and its readers (core/environment.hpp): every kind read alike, a bad value named.
#include "ipj/core/environment.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <set>
#include <string>

#include "ipj/core/error.hpp"

namespace ipj {
namespace {

// Sets a variable for one test and puts the old value back.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (old_.empty())
      ::unsetenv(name_);
    else
      ::setenv(name_, old_.c_str(), 1);
  }

 private:
  const char* name_;
  std::string old_;
};

std::string usage_message(const std::function<void()>& read) {
  try {
    read();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    return error.what();
  }
  return "";
}

TEST(Environment, SwitchesReadTheUsualSpellingsAndNameAnythingElse) {
  for (const char* on : {"1", "yes", "TRUE", "On"}) {
    ScopedVariable set("IPJ_STATIC_THREADS", on);
    EXPECT_TRUE(environment_switch("IPJ_STATIC_THREADS")) << on;
  }
  for (const char* off : {"", "0", "no", "False", "OFF"}) {
    ScopedVariable set("IPJ_STATIC_THREADS", off);
    EXPECT_FALSE(environment_switch("IPJ_STATIC_THREADS")) << off;
  }
  ScopedVariable set("IPJ_STATIC_THREADS", "maybe");
  const std::string message = usage_message([] { environment_switch("IPJ_STATIC_THREADS"); });
  EXPECT_NE(message.find("IPJ_STATIC_THREADS='maybe' is not a switch: use 1 (on) or 0 (off)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("thread plans ignore the machine's load"), std::string::npos)
      << message;  // its help
}

TEST(Environment, NumbersMustBePositiveAndFinite) {
  {
    ScopedVariable set("IPJ_CPU_TDP_W", "");
    EXPECT_FALSE(environment_number("IPJ_CPU_TDP_W").has_value());
  }
  {
    ScopedVariable set("IPJ_CPU_TDP_W", "65.5");
    EXPECT_DOUBLE_EQ(environment_number("IPJ_CPU_TDP_W").value_or(0.0), 65.5);
  }
  for (const char* bad : {"abc", "65W", "0", "-3", "nan", "inf"}) {
    ScopedVariable set("IPJ_CPU_TDP_W", bad);
    EXPECT_NE(usage_message([] { environment_number("IPJ_CPU_TDP_W"); }).find("is not a positive number"),
              std::string::npos)
        << bad;
  }
}

TEST(Environment, ChoicesAreReadInAnyCaseAndDefaultToTheFirst) {
  {
    ScopedVariable set("IPJ_WAIT_POLICY", "");
    EXPECT_EQ(environment_choice("IPJ_WAIT_POLICY"), "auto");
  }
  {
    ScopedVariable set("IPJ_WAIT_POLICY", "Short-Spin");
    EXPECT_EQ(environment_choice("IPJ_WAIT_POLICY"), "short-spin");
  }
  ScopedVariable set("IPJ_WAIT_POLICY", "short");  // a prefix is not a value
  EXPECT_NE(usage_message([] {
              environment_choice("IPJ_WAIT_POLICY");
            }).find("IPJ_WAIT_POLICY='short' is not one of auto, passive or short-spin (any case)"),
            std::string::npos);
}

TEST(Environment, TheCheckReadsEveryVariableInTheTable) {
  std::set<std::string> names;
  for (const EnvironmentVariable& variable : environment_variables()) {
    EXPECT_TRUE(names.insert(variable.name).second) << variable.name << " listed twice";
    EXPECT_EQ(std::string(variable.name).rfind("IPJ_", 0), 0U) << variable.name;
    EXPECT_NE(std::string(variable.help), "") << variable.name;
    EXPECT_EQ(variable.kind == EnvironmentKind::choice, std::string(variable.values) != "") << variable.name;
  }
  EXPECT_NO_THROW(check_environment());
  ScopedVariable set("IPJ_NO_REEXEC", "2");
  EXPECT_NE(usage_message([] { check_environment(); }).find("IPJ_NO_REEXEC='2'"), std::string::npos);
  EXPECT_THROW(environment_switch("IPJ_NOT_LISTED"), Error);  // a reader of an unlisted name is a bug
}

}  // namespace
}  // namespace ipj
