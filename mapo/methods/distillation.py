"""The tensor side of RAPO's verbal self-distillation: a reply's next-token distributions
and the top-K reverse KL that pulls the student's toward the teacher's.

`mapo.methods.rapo` picks the replies, builds the teacher's prompt and bounds and scales the
loss; nothing here knows about dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def reply_logprobs(model: torch.nn.Module, ids: Sequence[int], length: int, temperature: float = 1.0) -> torch.Tensor:
    """log p(. | ids[:j]) over the vocabulary at each of the last `length` positions j: [length, V]."""
    device = next(model.parameters()).device
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
    positions = torch.arange(len(ids) - length, len(ids), device=device)
    logits = model(input_ids=input_ids, logits_to_keep=positions - 1, use_cache=False).logits[0].float()
    return torch.log_softmax(logits / temperature, dim=-1)


def topk_reverse_kl(student_logp: torch.Tensor, teacher_logp: torch.Tensor, top_k: int) -> torch.Tensor:
    """Per-position reverse KL(student || teacher) over the student's top-K tokens plus one tail bucket.

    Both inputs are log-probabilities [N, V] over the vocabulary. With S the student's
    K most likely tokens, p the student and q the teacher:
    head = sum_{a in S} p(a) log(p(a) / q(a)), tail = P log(P / Q) with P = 1 - p(S),
    Q = 1 - q(S): the exact KL between the two distributions coarsened to S + {rest},
    so it is >= 0 and 0 when they agree. Gradients flow into `student_logp` only.
    """
    if student_logp.shape != teacher_logp.shape or student_logp.dim() != 2:
        raise ValueError(
            f"topk_reverse_kl: student {tuple(student_logp.shape)} and teacher {tuple(teacher_logp.shape)} "
            "must both be [positions, vocabulary]"
        )
    if top_k < 1:
        raise ValueError(f"topk_reverse_kl: top_k must be >= 1, got {top_k}")
    teacher_logp = teacher_logp.detach()
    k = min(top_k, student_logp.shape[-1])
    index = student_logp.detach().topk(k, dim=-1).indices
    logp = student_logp.gather(-1, index)
    logq = teacher_logp.gather(-1, index)
    head = (logp.exp() * (logp - logq)).sum(-1)
    if k == student_logp.shape[-1]:
        return head
    tiny = torch.finfo(student_logp.dtype).tiny
    p_tail = (1.0 - logp.exp().sum(-1)).clamp_min(tiny)
    q_tail = (1.0 - logq.exp().sum(-1)).clamp_min(tiny)
    return head + p_tail * (p_tail.log() - q_tail.log())
