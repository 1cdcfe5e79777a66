"""Shared building blocks with no family in them: attention, layers, heads, LSTM helpers, the CRF,
the scalar mix, the fp32 inference product. The families' models are made of these."""
