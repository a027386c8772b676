# A Python model with custom metrics (pb_utils.MetricFamily): per request it counts the request, sets a
# gauge to the input's first value and observes it in a histogram; OUTPUT = INPUT. A mistaken use
# (decrementing the counter) is answered with the error, for the test to see.
import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        requests = pb_utils.MetricFamily("counted_requests", "Requests seen", pb_utils.MetricFamily.COUNTER)
        last = pb_utils.MetricFamily(
            "counted_last_value", "The last first value", pb_utils.MetricFamily.GAUGE
        )
        values = pb_utils.MetricFamily("counted_values", "First values", pb_utils.MetricFamily.HISTOGRAM)
        self.requests = requests.Metric(labels=labels)
        self.last = last.Metric(labels=labels)
        self.values = values.Metric(labels=labels, buckets=[1.0, 10.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            first = float(value.flat[0])
            if first < 0:
                try:
                    self.requests.increment(first)
                except pb_utils.TritonModelException as exc:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message())))
                    continue
            self.requests.increment(1)
            self.last.set(first)
            self.values.observe(first)
            count = np.array([self.requests.value()], dtype=np.float32)
            outputs = [pb_utils.Tensor("OUTPUT", value), pb_utils.Tensor("COUNT", count)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
