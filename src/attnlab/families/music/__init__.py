"""The Music Transformer: relative attention with the skewing trick.

The package holds what is only this family's: task.py (pieces -> token streams -> windows;
per-piece NLL; primers), train.py (``attnlab train music``, on cli/window_runs.py),
generate.py (``generate-music``), evaluate.py (``evaluate-music``), figures.py (piano roll,
WAV) and pipeline.py (``attnlab.load``). The music encodings and data sets stay in the core's
attnlab.data.music, which the data registry's ``jsb`` set (data/download.py) converts with.
"""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="music",
    config_family="music_transformer",
    title="Music Transformer",
    verbs={"generate-music": "attnlab.families.music.generate", "evaluate-music": "attnlab.families.music.evaluate"},
    train="attnlab.families.music.train",
    evaluate="evaluate-music",
    pipeline="attnlab.families.music.pipeline:MusicPipeline",
    attention="attnlab.viz.explorer.maps:decoder_lm_attention",
    explore="attnlab.families.music.explore:load_source",
    onnx="attnlab.families.music.onnx:graph",
))
