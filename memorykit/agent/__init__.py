"""Agents: memory as tools, the one tool loop, the memory agent and the tool agent."""
