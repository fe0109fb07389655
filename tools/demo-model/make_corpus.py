#!/usr/bin/env python3
"""Writes the demo model's training text: short, simple English stories and facts generated
from a small grammar (deterministic for a given seed). The project makes its own text because
no dataset can be downloaded here."""
import argparse
import random

NAMES = ["Tom", "Lily", "Ben", "Mia", "Sam", "Anna", "Max", "Lucy", "Jack", "Emma", "Leo", "Sara", "Tim", "Zoe", "Dan", "Amy"]
ANIMALS = ["cat", "dog", "bird", "rabbit", "fox", "bear", "duck", "frog", "mouse", "horse", "owl", "fish", "lion", "pig"]
ADJ = ["little", "big", "happy", "small", "kind", "brave", "funny", "old", "young", "shy", "clever", "sleepy"]
COLORS = ["red", "blue", "green", "yellow", "pink", "brown", "white", "black", "orange", "purple"]
PLACES = ["park", "forest", "garden", "house", "farm", "town", "school", "beach", "river", "hill", "village", "field"]
THINGS = ["ball", "kite", "box", "hat", "book", "cake", "apple", "flower", "toy", "boat", "drum", "cup", "car", "bike"]
FOODS = ["apples", "bread", "cookies", "soup", "carrots", "cake", "milk", "honey", "berries", "cheese"]
ACTIVITIES = ["play with a ball", "fly a kite", "read a book", "bake a cake", "build a tower", "paint a picture",
              "climb a tree", "swim in the river", "sing a song", "ride a bike", "plant a flower", "find a treasure"]
FEELINGS = ["happy", "sad", "scared", "excited", "tired", "proud", "surprised", "angry", "calm", "curious"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "snowy", "cloudy"]
TIMES = ["One day", "In the morning", "After lunch", "That night", "The next day", "Later"]
FACTS = [
    "The sun is hot and bright.", "The sky is blue.", "Grass is green.", "Snow is cold and white.",
    "Fish live in water.", "Birds can fly.", "Cats like to sleep.", "Dogs like to run and play.",
    "The moon comes out at night.", "Rain falls from the clouds.", "Bees make honey.", "Trees have leaves.",
    "A week has seven days.", "Water is wet.", "Fire is hot.", "Ice is cold.", "Cows give milk.",
    "Apples grow on trees.", "The ocean is big and deep.", "Flowers need water and sun.",
]


def a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def story(r):
    pron = r.choice(["he", "she"])
    name = r.choice(NAMES[0::2] if pron == "he" else NAMES[1::2])
    friend = r.choice([n for n in NAMES if n != name])
    animal, adj, place = r.choice(ANIMALS), r.choice(ADJ), r.choice(PLACES)
    thing, color, act = r.choice(THINGS), r.choice(COLORS), r.choice(ACTIVITIES)
    feel, feel2, food, weather = r.choice(FEELINGS), r.choice(FEELINGS), r.choice(FOODS), r.choice(WEATHER)
    poss = "his" if pron == "he" else "her"
    opening = r.choice([
        f"Once upon a time, there was {a(adj)} {animal} named {name}.",
        f"Once upon a time, in {a(adj)} {place}, there lived {a(animal)} named {name}.",
        f"{name} was {a(adj)} {animal} who lived near the {place}.",
        f"There was {a(adj)} girl named {name}." if pron == "she" else f"There was {a(adj)} boy named {name}.",
    ])
    s = [opening]
    s.append(r.choice([
        f"{name} had {a(color)} {thing}.",
        f"{pron.capitalize()} loved to {act}.",
        f"Every day, {name} went to the {place}.",
        f"{name} liked to eat {food}.",
    ]))
    s.append(f"{r.choice(TIMES)}, it was {weather} and {name} wanted to {act}.")
    s.append(r.choice([
        f"{name} asked {poss} friend {friend} to come too.",
        f"{pron.capitalize()} went to the {place} with {friend}.",
        f"{name} saw {a(color)} {thing} under a tree.",
        f"But {name} could not find {poss} {thing}.",
    ]))
    s.append(r.choice([
        f'"Can you help me?" asked {name}. "Yes, I can help you," said {friend}.',
        f'"Look at that!" said {friend}. "It is {a(color)} {thing}!"',
        f'"I am {feel}," said {name}. {friend} gave {name} a big hug.',
        f'{friend} said, "Let us {act} together."',
    ]))
    s.append(r.choice([
        f"They looked everywhere and at last they found the {thing}.",
        f"They had a lot of fun and ate {food}.",
        f"They played in the {place} until the sun went down.",
        f"{name} was {feel2} and said thank you to {friend}.",
    ]))
    s.append(r.choice([
        f"From that day on, {name} and {friend} were best friends.",
        f"{name} went home and went to sleep. The end.",
        f"{name} learned that it is good to share.",
        f"It was the best day ever.",
    ]))
    return " ".join(s)


def facts(r):
    return " ".join(r.sample(FACTS, r.randint(3, 6)))


def dialog(r):
    a, b = r.sample(NAMES, 2)
    thing, color, food = r.choice(THINGS), r.choice(COLORS), r.choice(FOODS)
    return (f'{a} said, "Hello, {b}! How are you?" {b} said, "I am {r.choice(FEELINGS)}. '
            f'Do you want to see my {color} {thing}?" "Yes, please!" said {a}. '
            f"Then they ate some {food} together.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--paragraphs", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    r = random.Random(args.seed)
    with open(args.out, "w") as f:
        for _ in range(args.paragraphs):
            k = r.random()
            f.write((story(r) if k < 0.75 else facts(r) if k < 0.85 else dialog(r)) + "\n")


if __name__ == "__main__":
    main()
