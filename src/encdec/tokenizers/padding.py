"""Rows of token ids of different lengths as one batch, padded on the side a tokenizer pads."""

import torch


def padded(rows: list[list[int]], pad_id: int, side: str, mask_dtype: torch.dtype = torch.bool) -> dict:
    """{"input_ids": (B, S) long, "attention_mask": (B, S) of `mask_dtype`}: each row at the right of its line
    (`side` "left": the causal families' prompts continue from the last column) or at its left, `pad_id` and
    a false mask elsewhere. S is the longest row's length."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), width, dtype=mask_dtype)
    for i, row in enumerate(rows):
        columns = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        input_ids[i, columns] = torch.tensor(row, dtype=torch.long)
        attention_mask[i, columns] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}
