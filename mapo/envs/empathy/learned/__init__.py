"""The learned judge: a cross-encoder fine-tuned from the shipped MiniLM on the labelled exemplars.

    model    the cross-encoder (frozen bottom, trained top layers, six 3-way heads), its folder format
    train    training on exemplars (`mapo env train-judge`), writer units for leave-one-writer-out
    judge    the `learned` judge kind (option path=DIR)
"""
