"""The tool guard's request matchers: several phrasings each that ask for what a built-in tool answers, and
sentences near them that do not."""

from __future__ import annotations

import pytest

from rtc_agent.apps.agent.tool_guard import asks_for_arithmetic, asks_for_conversion, asks_for_time

TIME = [
    "What time is it in Tokyo?",
    "what time is it",
    "Do you know what time it is in New York?",
    "What's the time in Paris right now?",
    "What is the current time?",
    "Tell me the local time in Sydney.",
    "Can you tell me the time?",
    "What's the date today?",
    "What is today's date?",
    "What day is it?",
    "What day of the week is it in London?",
    "what year is it",
    "What\u2019s the time in Berlin?",  # a typographic apostrophe, as phones type it
]
NOT_TIME = [
    "What time does the train leave tomorrow?",
    "I had a great time at the party.",
    "What is the date of the French Revolution?",
    "Tell me about the history of Tokyo.",
    "How much time do I need to boil an egg?",
    "What is 17 times 23?",
    "Set a timer for five minutes.",
]
ARITHMETIC = [
    "What is 17 times 23?",
    "what's seventeen times twenty-three",
    "Calculate 12 + 5 * 3.",
    "How much is 100 divided by 7?",
    "What is 2 to the power of 10?",
    "What's 15 percent of 80?",
    "What's 15% of 80?",
    "What is the square root of 144?",
    "one hundred and five minus forty two",
    "What is 144/12?",
    "7 x 8",
    "What is 3.5 multiplied by 4?",
    "17 \u00d7 23",  # the multiplication sign
]
NOT_ARITHMETIC = [
    "I take my pills two times a day.",
    "She has three plus years of experience.",
    "Do you offer 24/7 support?",
    "What time is it in Tokyo?",
    "Convert 5 km to miles.",
    "I was born in 1990 and I have two cats.",
    "Tell me a joke.",
    "Pages 10-20 are missing.",
]
UNITS = [
    "Convert 5 km to miles.",
    "How many miles is 10 kilometers?",
    "What is 100 degrees Fahrenheit in Celsius?",
    "72 °F to °C",
    "How many feet are in a meter?",
    "How many pounds is 3 kg?",
    "ten miles in kilometres",
    "How many ounces in two cups?",
    "Please convert 3 gallons into liters.",
    "How many seconds are in an hour?",
]
NOT_UNITS = [
    "I walked 5 km to the station.",
    "How many people live in Tokyo?",
    "Convert this sentence to French.",
    "It takes 5 minutes to get there.",
    "What is 17 times 23?",
    "What time is it in Tokyo?",
    "I ran 5 miles in a day.",
]


@pytest.mark.parametrize("text", TIME)
def test_time_requests_are_recognised(text: str) -> None:
    assert asks_for_time(text)


@pytest.mark.parametrize("text", NOT_TIME)
def test_other_sentences_about_time_are_not(text: str) -> None:
    assert not asks_for_time(text)


@pytest.mark.parametrize("text", ARITHMETIC)
def test_arithmetic_requests_are_recognised(text: str) -> None:
    assert asks_for_arithmetic(text)


@pytest.mark.parametrize("text", NOT_ARITHMETIC)
def test_numbers_without_arithmetic_are_not(text: str) -> None:
    assert not asks_for_arithmetic(text)


@pytest.mark.parametrize("text", UNITS)
def test_conversion_requests_are_recognised(text: str) -> None:
    assert asks_for_conversion(text)


@pytest.mark.parametrize("text", NOT_UNITS)
def test_amounts_with_units_but_no_conversion_are_not(text: str) -> None:
    assert not asks_for_conversion(text)


def test_empty_and_odd_input_is_no_request() -> None:
    for matcher in (asks_for_time, asks_for_arithmetic, asks_for_conversion):
        assert not matcher("")
        assert not matcher("???")
        assert not matcher("1" * 5000)
