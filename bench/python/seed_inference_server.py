# The seeds' FastAPI inference server (seed 004, section 3.2.1 "inference_server.py"), on CPU with the same MLP as
# ipj: POST /predict with a JSON list of 784 floats, a background thread batching up to 16 requests or 50 ms.
# One fix to the seed: futures are completed with loop.call_soon_threadsafe (set_result from another thread is
# not thread-safe in asyncio and can leave requests hanging). Usage: seed_inference_server.py --port 8200
import argparse
import asyncio
import queue
import threading
import time
from typing import List

import torch
import uvicorn
from fastapi import FastAPI

app = FastAPI()
model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).eval()
request_queue = queue.Queue()
batch_size = 16
max_wait_time = 0.05  # seconds


def batch_inference_worker():
    while True:
        batch_inputs, batch_tasks = [], []
        start_time = time.time()
        while len(batch_inputs) < batch_size and (time.time() - start_time) < max_wait_time:
            try:
                input_data, task = request_queue.get(timeout=max_wait_time)
                batch_inputs.append(input_data)
                batch_tasks.append(task)
            except queue.Empty:
                break
        if batch_inputs:
            with torch.no_grad():
                batch_results = model(torch.stack(batch_inputs))
            for result, (loop, future) in zip(batch_results, batch_tasks):
                loop.call_soon_threadsafe(future.set_result, result)


threading.Thread(target=batch_inference_worker, daemon=True).start()


@app.post("/predict")
async def predict(input_data: List[float]):
    loop = asyncio.get_event_loop()
    future = loop.create_future()
    request_queue.put((torch.tensor(input_data), (loop, future)))
    result = await future
    return {"prediction": result.tolist()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8200)
    args = parser.parse_args()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
