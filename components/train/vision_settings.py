"""The image families' settings: the config's `training.image:` section (components/train/vision.py)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from components.contracts.settings import Strict
from components.contracts.storage import schemes


class VisionSettings(Strict):
    """How an image family (cnn, resnet50, efficientnetb0, mobilenetv3, vit) takes the images:
    its starting weights, fine-tuning, and the sizes of the small cnn and the vit."""

    weights: Optional[str] = Field(
        None, description=f"a weights file for the backbone (a local path, {schemes.named()}), e.g. Keras' "
                          "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5; unset: no weights (trained from "
                          "scratch). Never downloaded at run time")
    fine_tune_after: int = Field(
        0, ge=0, description="with weights: train the head alone (the backbone frozen) for this many epochs, then "
                             "the whole network; 0: the whole network from the start")
    filters: int = Field(32, ge=4, le=512, description="cnn: the first block's filters (doubled each block)")
    patch_size: int = Field(4, ge=1, description="vit: the side of a square patch, in pixels")
    vit_layers: int = Field(4, ge=1, le=48, description="vit: transformer blocks")
    vit_dim: int = Field(64, ge=8, description="vit: the width of a patch's embedding")
    vit_heads: int = Field(4, ge=1, description="vit: attention heads")

    @model_validator(mode="after")
    def _fine_tune_needs_weights(self) -> "VisionSettings":
        if self.fine_tune_after and not self.weights:
            raise ValueError("fine_tune_after freezes a backbone that starts from weights; set training.image.weights "
                             "to a weights file, or fine_tune_after: 0")
        if self.vit_dim % self.vit_heads:
            raise ValueError(f"vit_dim {self.vit_dim} is not a multiple of vit_heads {self.vit_heads}")
        return self
