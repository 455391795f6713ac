"""The turn structure of a model's own chat template, for models without a silence token.

Such a model was never trained to stay quiet: the context starts inside the user turn with the standing prompt,
the first frames close that turn and open the assistant's, and after the model ended its turn (its end-of-turn
token stands for ``<|silence|>``) new frames open a new user turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rtc_agent.engines.vlm.chat_format import ChatFormat

__all__ = ["TemplateChatFormat"]

_MARK = "MARKER7f3a"


class TemplateChatFormat(ChatFormat):
    """The turn structure of a model's own chat template, for models without a silence token.

    Built from ``render(messages, add_generation_prompt) -> str`` by rendering marker conversations: ``prefix``
    (up to the first user message's content, with ``{system}``), ``user_close`` (the user turn's end and the
    generation prompt) and ``switch`` (the assistant turn's end and the next user turn's opening).
    """

    silence_text = ""  # no silence token to insert

    def __init__(self, render: Callable[[list[dict[str, Any]], bool], str], image_token: str,
                 decode_token: Callable[[int], str]) -> None:
        self.image_placeholder = image_token
        self._decode_token = decode_token
        sys_m, user_m, asst_m, next_m = (f"S{_MARK}", f"U{_MARK}", f"A{_MARK}", f"N{_MARK}")

        def msg(role: str, text: str) -> dict[str, Any]:
            return {"role": role, "content": [{"type": "text", "text": text}]}

        try:
            full = render([msg("system", sys_m), msg("user", user_m), msg("assistant", asst_m), msg("user", next_m)],
                          True)
            self.has_system = sys_m in full
        except Exception:  # templates that reject a system turn
            full = render([msg("user", user_m), msg("assistant", asst_m), msg("user", next_m)], True)
            self.has_system = False
        if not all(m in full for m in (user_m, asst_m, next_m)):
            raise ValueError("the chat template does not render plain text messages")
        u, a, n = full.index(user_m), full.index(asst_m), full.index(next_m)
        self.prefix = full[:u].replace(sys_m, "{system}")
        self.switch = full[a + len(asst_m):n]
        # the user turn's end and the assistant opener, as the generation prompt writes them
        first = render(([msg("system", sys_m)] if self.has_system else []) + [msg("user", user_m)], True)
        self.user_close = first[first.index(user_m) + len(user_m):]
        self.state = "user"  # the context ends inside the user turn
        self._end_text = ""

    def initial(self, system_prompt: str, initial_prompt: str) -> str:
        self.state = "user"
        return self.prefix.replace("{system}", system_prompt) + initial_prompt

    def segment(self, prompts: Sequence[str], timestamps: Sequence[float]) -> str:
        frames = "".join(self.frame(ts) for ts in timestamps)
        asked = "".join(("\n" if frames or i else "") + p for i, p in enumerate(prompts))
        if self.state == "user":
            text = frames + asked + self.user_close
        elif self.state == "closed":  # the model ended its turn itself: do not repeat its end token
            head = self.switch
            if self._end_text and head.startswith(self._end_text):
                head = head[len(self._end_text):]
            text = head + frames + asked + self.user_close
        elif prompts:  # mid-answer: a prompt closes the assistant turn
            text = self.switch + frames + asked + self.user_close
        else:  # mid-answer frames go into the context as they come (the reference's way)
            return frames
        self.state = "assistant"
        return text

    def generated(self, token_id: int, is_silence: bool) -> None:
        if is_silence:
            self.state = "closed"
            self._end_text = self._decode_token(token_id)
