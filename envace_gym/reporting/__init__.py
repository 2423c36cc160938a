"""What the package draws for people: the viewer's page (``viewer``) and the figures of runs, comparisons,
evaluations and training (``figures``)."""
