# A step model that cannot load here, as a KIND_GPU model on a host without a GPU.


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no GPU here")

    def execute(self, requests):
        return []
