"""Training script with a missing dependency: fails at import time."""
import torch
import a_module_that_does_not_exist  # noqa: F401


def main():
    model = torch.nn.Linear(10, 2)
    print(model)


if __name__ == "__main__":
    main()
