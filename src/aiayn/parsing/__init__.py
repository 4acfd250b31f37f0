"""English constituency parsing with the Transformer (sec. 6.3, Table 4).

The paper casts parsing as translation from words to a linearized tree, as Vinyals & Kaiser
et al. 2015 (its reference [37]) did. Each stage is one module:

    trees.py         Penn Treebank bracketed trees: read (with clear errors), clean, write
    linearize.py     tree -> target token sequence, and model output -> well-formed tree
    evalb.py         labeled bracket precision / recall / F1 with EVALB's COLLINS.prm rules
    prepare.py       `aiayn prepare parse`: treebanks -> the usual prepared directory
    parser.py        `aiayn parse`: a checkpoint, tokenized sentences in, trees out
    demo_treebank.py gold trees of the offline demo grammar's English sentences
    demo.py          `aiayn demo --task parse`: the whole pipeline offline, in minutes
"""
