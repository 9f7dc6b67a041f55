# Where a bf16 autocast training step of the seeds' MLP (784-512-512-10, batch 256, SGD momentum 0.9) spends its time
# in Debian's Python torch on 2 threads: ms per step, then torch.profiler's table of 50 steps (docs/PERFORMANCE.md).
# Usage: /usr/bin/python3 bench/python/mlp_bf16_step_profile.py
import torch, time
torch.manual_seed(0)
torch.set_num_threads(2)
m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784,512), torch.nn.ReLU(), torch.nn.Linear(512,512), torch.nn.ReLU(), torch.nn.Linear(512,10))
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(256,1,28,28); y = torch.randint(0,10,(256,))
def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(x)
        loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
for _ in range(30): step()
t=time.perf_counter()
for _ in range(200): step()
print("ms/step %.3f" % ((time.perf_counter()-t)/200*1e3))
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(50): step()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
