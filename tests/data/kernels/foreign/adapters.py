"""The adapter of rms_norm_two_pass.comp: a scratch copy of the weight and 1 / row_width."""


class TwoPassAdapter:
    """Derives inv_width and asks for the weight's scratch copy (role "gamma")."""

    provides = ("inv_width",)

    def __init__(self, static):
        self.width = static["row_width"]

    def values(self, values):
        return {"inv_width": 1.0 / values["row_width"]}

    def scratch(self):
        return {"gamma": 4 * self.width}
