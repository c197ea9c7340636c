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


@pytest.mark.parametrize(
    "a,b,kind",
    [
        ("Laptops under $1000", "Laptops over $1000", "comparator"),
        ("Flights before 9", "Flights after 9", "comparator"),
        ("The maximum dose", "The minimum dose", "comparator"),
        ("Weather today", "Weather tomorrow", "time"),
        ("Alarm at 7 am", "Alarm at 7 p.m.", "time"),
        ("Open on Mon", "Open on Friday", "time"),
        ("Closed next Monday", "Closed this Monday", "time"),
        ("Buy 10 shares", "Sell 10 shares", "opposite"),
        ("Train times to Oxford", "Train times from Oxford", "opposite"),
        ("Turn on dark mode", "Turn off dark mode", "opposite"),
        ("Enable alerts", "Disable alerts", "opposite"),
        ("What is the function of money", "What is the function of TV", "entity"),
        ("Is the Berlin office open", "Is the Munich office open", "entity"),
        ("Is Paris bigger than London", "Is London bigger than Paris", "order"),
    ],
)
def test_each_check_names_its_kind(a, b, kind):
    from router.cache._private.text_guard import incompatibility

    assert incompatibility(a, b) == kind


@pytest.mark.parametrize(
    "a,b",
    [
        ("Laptops under $1000", "Laptops below $1000"),
        ("Set an alarm for 7 am tomorrow", "Set an alarm at 7am tomorrow"),
        ("What's the exchange rate from dollars to euros?", "Exchange rate for dollar to euro?"),
        ("Which is the largest planet?", "Which is the biggest planet?"),
        ("I am hungry", "I'm hungry"),
    ],
)
def test_paraphrases_pass_the_new_checks(a, b):
    assert compatible(a, b)


def test_the_guard_alone_rejects_every_bundled_near_miss_but_lower_case_substitutions():
    from router.cache.near_miss_set import load_near_misses

    leaks = [(p.kind, p.stored, p.asked) for p in load_near_misses()
             if not p.same and compatible(p.stored, p.asked)]
    # The documented gap (apple/orange, dogs/cats): left to the similarity threshold, which the
    # integration test over the same set checks with the real embedder.
    assert {kind for kind, *_ in leaks} <= {"entities"}, leaks
    assert len(leaks) <= 3, leaks
