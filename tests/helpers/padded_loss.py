"""A loss nobody here would call wrong on one device: the mean squared error over the
rows that are not padding (a row whose first target is below ``PAD_BELOW`` counts as
padding), the "token mean" of language-model training. Under ``data.split=sharded`` each
rank divides by its own count of real rows and the engine averages the ranks' gradients:
the mean of the ranks' means, not the global mean the standalone copy takes, a real fault
(it is why torchtitan and Megatron all-reduce the token count first) whose size is set by
how unevenly the padding falls on the ranks. Plugged in with
``train.loss=tests.helpers.padded_loss.token_mean_mse``."""

PAD_BELOW = -2.5  # about 0.6% of standard-normal targets: a few padded rows per large batch


def token_mean_mse(out, target):
    """``sum over real rows of (out - target)^2 / (real rows x columns)``, shapes
    ``(rows, columns)``; a padded row (``target[:, 0] < PAD_BELOW``) weighs nothing."""
    real = (target[:, :1] >= PAD_BELOW).to(target.dtype)  # counted in the targets' float32, not a bf16 output's
    return ((out - target) ** 2 * real).sum() / (real.sum() * out.shape[-1])
