"""The rewards that grade a completion: math answers (math.py) and code against its tests in
the sandbox (code.py)."""
