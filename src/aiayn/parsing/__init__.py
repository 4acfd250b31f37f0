"""English constituency parsing with the Transformer (sec. 6.3, Table 4).

The paper casts parsing as translation from words to a linearized tree, as Vinyals & Kaiser
et al. 2015 (its reference [37]) did. Each stage is one module:

    trees.py         Penn Treebank bracketed trees: read (with clear errors), clean, write
    linearize.py     tree -> target token sequence, and model output -> well-formed tree
    evalb.py         EVALB with COLLINS.prm, line for line, and a strict F1 beside it
    evalb_text.py    EVALB's report as text: its summary, notes, the strict figure
    prepare.py       `aiayn prepare parse`: treebanks -> the usual prepared directory
    parser.py        `aiayn parse` (sentences in, trees out), `aiayn evaluate --task parse`
    demo_treebank.py gold trees of the offline demo grammar's English sentences
    demo.py          `aiayn demo --task parse`: the whole pipeline offline, in minutes
"""
