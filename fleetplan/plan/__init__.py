"""Plans: the immutable `Plan` of `Step`s (`model`), its versioned file (`planfile`), how one is
made from desired resources, state and a live snapshot (`planning`), and its renderings
(`rendering`). Apply does exactly what a plan says and never reads the config.
"""
