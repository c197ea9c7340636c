"""Labelled text pairs for the semantic tier's precision test (written by hand for this project).

``True`` = the same request (a cached answer for one is right for the other); ``False`` = a
different request, many of them hard negatives: negations, different numbers, antonyms, other
entities, swapped roles.
"""

PAIRS: list[tuple[str, str, bool]] = [
    # paraphrases
    ("How do I reset my password?", "How can I reset my password?", True),
    ("What is the capital of France?", "What's the capital city of France?", True),
    ("What time does the bank open?", "When does the bank open?", True),
    ("Cancel my order", "Please cancel my order", True),
    ("How do I change my email address?", "How can I change my email address?", True),
    ("Where is my package?", "Where is my parcel?", True),
    ("I want a refund for my purchase", "I would like a refund for my purchase", True),
    ("Can you tell me the weather in Berlin today?", "What's the weather in Berlin today?", True),
    ("How do I delete my account?", "How can I delete my account?", True),
    ("Translate 'good morning' into Spanish", "Translate good morning to Spanish", True),
    ("What are your opening hours?", "What are your business hours?", True),
    ("Show me flights from Boston to Chicago", "Find flights from Boston to Chicago", True),
    ("Is there a fee for international transfers?", "Do international transfers have a fee?", True),
    ("My card was stolen", "My credit card was stolen", True),
    ("How long does shipping take?", "How long does delivery take?", True),
    ("Summarize this article", "Please summarize this article", True),
    ("How many calories are in a banana?", "How many calories does a banana have?", True),
    ("Set an alarm for 7 am", "Set an alarm at 7 am", True),
    ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?", True),
    ("I can't log in to my account", "I cannot log into my account", True),
    ("Play some jazz music", "Play jazz music", True),
    (
        "What's the exchange rate from dollars to euros?",
        "What is the dollar to euro exchange rate?",
        True,
    ),
    # non-paraphrases: negation
    ("The movie was good", "The movie was not good", False),
    ("I want to receive marketing emails", "I don't want to receive marketing emails", False),
    ("Is the payment complete?", "Is the payment not complete?", False),
    ("Does the hotel allow pets?", "Does the hotel not allow pets?", False),
    # different numbers
    ("Transfer 100 dollars to Alice", "Transfer 500 dollars to Alice", False),
    ("Set an alarm for 7 am", "Set an alarm for 8 am", False),
    ("Book a table for two people", "Book a table for four people", False),
    ("What is 15 times 3?", "What is 15 times 4?", False),
    ("Show orders from 2021", "Show orders from 2022", False),
    ("Refund order 48213", "Refund order 48231", False),
    # antonyms / opposite intent
    ("Is the store open on Sunday?", "Is the store closed on Sunday?", False),
    ("I love this product", "I hate this product", False),
    ("Turn on the lights", "Turn off the lights", False),
    ("Increase the volume", "Decrease the volume", False),
    (
        "How do I enable two-factor authentication?",
        "How do I disable two-factor authentication?",
        False,
    ),
    ("Add milk to my shopping list", "Remove milk from my shopping list", False),
    ("Subscribe me to the newsletter", "Unsubscribe me from the newsletter", False),
    # other entities / swapped roles
    ("Book a flight to Paris", "Book a flight to London", False),
    ("Show me red shoes", "Show me blue shoes", False),
    ("What is the capital of Austria?", "What is the capital of Australia?", False),
    ("Flights from Boston to Chicago", "Flights from Chicago to Boston", False),
    ("Flights from Boston to Chicago", "Find flights from Boston to Chicago", True),
    ("Who wrote Pride and Prejudice?", "Who wrote Sense and Sensibility?", False),
    ("How do I reset my password?", "How do I reset my router?", False),
    ("Weather in Berlin today", "Weather in Berlin tomorrow", False),
    ("Convert dollars to euros", "Convert euros to dollars", False),
]
