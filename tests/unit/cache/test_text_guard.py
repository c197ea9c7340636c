import pytest

from router.cache._private.text_guard import compatible


@pytest.mark.parametrize(
    "a,b",
    [
        ("How do I reset my password?", "how can i reset my password"),
        ("Send 100 dollars", "Transfer $100"),
        ("I can't log in", "I cannot log in"),
        ("Isn't it open?", "Is it not open?"),
        ("Book two tickets", "Book 2 tickets"),
        ("Pay 1,000 euros", "pay 1000 euros"),
        ("Show me flights from Boston to Chicago", "Find flights from Boston to Chicago"),
        ("My card was stolen", "My credit card was stolen"),
    ],
)
def test_compatible(a, b):
    assert compatible(a, b)


@pytest.mark.parametrize(
    "a,b",
    [
        ("Send 100 dollars", "Send 500 dollars"),
        ("Flight at 9:30", "Flight at 9:45"),
        ("The movie was good", "The movie was not good"),
        ("I can log in", "I can't log in"),
        ("Book two tickets", "Book three tickets"),
        ("Room 12 then room 21", "Room 21 then room 12"),
        ("Convert dollars to euros", "Convert euros to dollars"),
        ("Flights from Boston to Chicago", "Flights from Chicago to Boston"),
        ("Subscribe me to the newsletter", "Unsubscribe me from the newsletter"),
        ("I like this", "I dislike this"),
    ],
)
def test_incompatible(a, b):
    assert not compatible(a, b)
