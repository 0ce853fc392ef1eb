"""The LLM operator and everything it needs: configuration, endpoint, prompts, replies, cassettes,
a local server.
"""
