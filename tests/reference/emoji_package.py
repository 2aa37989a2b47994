"""A tiny fake of npm's emoji-datasource-twitter package (CI needs no 62 MB download)."""

import json

import numpy as np
from PIL import Image


def fake_package(root, count=12):
    """``count`` emoji in two categories, the first with two skin tones; 64×64 RGBA."""
    images = root / "img" / "twitter" / "64"
    images.mkdir(parents=True)
    table = []
    for i in range(count):
        entry = {"name": f"THING {i}", "unified": f"{i:04X}", "image": f"{i:04x}.png", "sort_order": count - i,
                 "category": "Animals" if i % 2 else "Objects", "has_img_twitter": True}
        rgba = np.zeros((64, 64, 4), dtype=np.uint8)
        rgba[:32, :, 0] = 255
        rgba[:32, :, 3] = 255 if i else 128  # the top half red (half transparent in the first), the rest clear
        Image.fromarray(rgba, "RGBA").save(images / entry["image"])
        if i == 0:
            entry["skin_variations"] = {}
            for tone in ("1F3FB", "1F3FF"):
                name = f"{i:04x}-{tone.lower()}.png"
                Image.fromarray(rgba, "RGBA").save(images / name)
                entry["skin_variations"][tone] = {"image": name, "has_img_twitter": True}
        table.append(entry)
    table.append({"name": "NO IMAGE", "image": "ffff.png", "sort_order": 0, "category": "Objects",
                  "has_img_twitter": False})
    (root / "emoji.json").write_text(json.dumps(table))
    return root
