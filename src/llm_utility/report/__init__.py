"""Tables and figures: the paper's analyses as polars computations (``analysis``) and their
rendering as CSV, Markdown and LaTeX (``tables``) or PNG and PDF (``figures``)."""
