"""Source state management (verbatim from the "Working with Data Sources" guide)."""

from datarax.sources import MemorySource, MemorySourceConfig

# Create source
data = [{"x": i} for i in range(100)]
config = MemorySourceConfig()
source = MemorySource(config, data)

# Iterate through some elements
iterator = iter(source)
for i in range(10):
    element = next(iterator)

# Source maintains iteration state
# Can be used for checkpointing

if __name__ == "__main__":  # run as a script: show the state a checkpoint would hold
    print("after 10 elements:", source.get_state())
