#!/bin/bash
echo "stopping"
