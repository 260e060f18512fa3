"""What a person can do with tasks: the service, its options, working directories, the card's
buttons."""
