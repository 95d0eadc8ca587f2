// kappa/tokenize/chat_message.hpp - one message of a conversation, what a
// chat template (chat_template.hpp) renders.
#pragma once

#include <string>

namespace kappa::tokenize {

/// One message of a conversation: {"role": role, "content": content}.
struct ChatMessage {
  std::string role;
  std::string content;
};

}  // namespace kappa::tokenize
