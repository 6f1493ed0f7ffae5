"""The parts of ``distir.transforms.synchronize``: ``plan`` (gradients, strategies,
checks), ``rewrite`` (the program rewrite), ``powersgd`` (PowerSGD's ops). Import the public
names from ``distir.transforms.synchronize``."""
