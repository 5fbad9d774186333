"""The full-screen terminal chat (`betcode chat`), built on Textual."""

from betcode.cli.chat.launch import ChatOptions, NoSessionToContinue, chat, run_chat

__all__ = ["ChatOptions", "NoSessionToContinue", "chat", "run_chat"]
