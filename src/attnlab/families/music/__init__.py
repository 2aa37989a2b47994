"""The Music Transformer: relative attention with the skewing trick."""

from attnlab.families import Family, register_family

FAMILY = register_family(Family(
    name="music",
    config_family="music_transformer",
    title="Music Transformer",
    verbs={"generate-music": "attnlab.cli.generate_music", "evaluate-music": "attnlab.cli.evaluate_music"},
    train="attnlab.cli.train_music",
    evaluate="evaluate-music",
    pipeline="attnlab.pipelines.music:MusicPipeline",
    explore="attnlab.families.music.explore:load_source",
    onnx="attnlab.interop.onnx_export:lm_graph",
))
