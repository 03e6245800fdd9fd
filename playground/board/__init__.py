"""board"""
